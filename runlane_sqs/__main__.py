from runlane_sqs.cli import main

main()
