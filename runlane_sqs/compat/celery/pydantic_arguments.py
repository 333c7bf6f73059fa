"""Celery's ``pydantic=True`` (:class:`PydanticArguments`): a task's arguments annotated
with a pydantic model are validated into it at the worker, and a returned model is dumped
to JSON. Only a task that asks for it imports pydantic."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from runlane_sqs.compat.celery.errors import UnsupportedOption
from runlane_sqs.compat.celery.options import CeleryTaskOptions
from runlane_sqs.core.errors import InvalidPayloadError


@dataclass(frozen=True)
class PydanticArguments:
    """Celery's ``pydantic=True``: the task's parameters annotated with a pydantic model
    (a ``BaseModel`` subclass), by name and position, validated at the worker with
    ``pydantic_strict`` and ``pydantic_context``; a returned model is dumped with
    ``pydantic_dump_kwargs`` (JSON mode unless they say otherwise)."""

    task: str
    models: dict[str, Any]
    """The annotated parameters' models, by name."""
    positions: tuple[str, ...]
    """The parameters' names in order (a bound task's ``self`` left out)."""
    strict: bool
    context: dict[str, Any] | None
    dump: dict[str, Any]

    @classmethod
    def of(cls, fn: Callable[..., Any], task: str, options: CeleryTaskOptions) -> PydanticArguments:
        try:
            from pydantic import BaseModel  # noqa: PLC0415 (only with pydantic=True)
        except ImportError as exc:
            raise UnsupportedOption(
                f"{task}: pydantic=True needs pydantic (pip install 'runlane-sqs[pydantic]')"
            ) from exc
        parameters = list(inspect.signature(fn, eval_str=True).parameters.values())
        if options.get("bind", False):
            parameters = parameters[1:]
        models = {
            p.name: p.annotation
            for p in parameters
            if isinstance(p.annotation, type) and issubclass(p.annotation, BaseModel)
        }
        return cls(
            task=task,
            models=models,
            positions=tuple(p.name for p in parameters),
            strict=options.get("pydantic_strict", False),
            context=options.get("pydantic_context"),
            dump={"mode": "json", **(options.get("pydantic_dump_kwargs") or {})},
        )

    def validated(
        self, args: list[Any], kwargs: dict[str, Any]
    ) -> tuple[list[Any], dict[str, Any]]:
        """The call's arguments, each annotated one validated into its model; a value that
        does not validate raises :class:`InvalidPayloadError` naming the argument and its
        fields (not retried)."""
        named = zip(self.positions, args, strict=False)
        given = [self._model(name, value) for name, value in named]
        given += args[len(given) :]
        return given, {key: self._model(key, value) for key, value in kwargs.items()}

    def _model(self, name: str, value: Any) -> Any:
        from pydantic import ValidationError  # noqa: PLC0415 (loaded with the models)

        model = self.models.get(name)
        if model is None:
            return value
        try:
            return model.model_validate(value, strict=self.strict, context=self.context)
        except ValidationError as exc:
            fields = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or '(the value)'}: {e['msg']}"
                for e in exc.errors(include_url=False, include_input=False)
            )
            raise InvalidPayloadError(
                f"{self.task}: argument {name!r} is not a valid {model.__name__}: {fields}"
            ) from None

    def dumped(self, value: Any) -> Any:
        """``value``, a model dumped (a returned one, or one given to the call)."""
        dump = getattr(value, "model_dump", None)
        return dump(**self.dump) if callable(dump) else value
