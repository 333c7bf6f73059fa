from runlane_sqs.cli import main

main(prog_name="runlane-sqs")
