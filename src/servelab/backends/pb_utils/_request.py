"""``pb_utils.InferenceRequest`` / ``InferenceResponse`` / ``InferenceResponseSender`` and BLS.

The server builds an InferenceRequest for every request it hands to ``execute``; a model builds one to
call another model (Business Logic Scripting): ``exec()`` waits for the answer, ``exec(decoupled=True)``
iterates a decoupled model's responses, ``async_exec()`` is the awaitable form for ``async def
execute``. Calls go through the services the backend installed (:mod:`._runtime`), so they enter the
server the way a client's request does.

servelab conveniences kept for models written against its first python API: ``request.inputs`` is
also a dict (``request.inputs["X"]``), ``request.get("X")`` returns the array, and
``response.as_dict()`` the outputs by name.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from servelab.backends.base import Emit, StreamItem
from servelab.backends.pb_utils import _runtime
from servelab.backends.pb_utils._errors import TritonError, TritonModelException, from_servelab, to_servelab
from servelab.backends.pb_utils._tensor import Tensor
from servelab.errors import ServelabError

__all__ = ["InferenceRequest", "InferenceResponse", "InferenceResponseSender", "ResponseIterator"]

# Triton's flags (tritonserver.h), re-exported by the package
TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2


#: the parameters of nearly every request and response: no json call for them (a third of a python model's
#: per-request bookkeeping was three json.dumps and a json.loads of an empty dict)
_NO_PARAMETERS = "{}"


def _parameters_json(parameters: Mapping[str, Any] | None, where: str) -> str:
    """Triton's parameters form: a JSON object of bool, int and str values."""
    if not parameters:
        return _NO_PARAMETERS
    params = dict(parameters)
    for key, value in params.items():
        if not isinstance(key, str) or not isinstance(value, bool | int | str):
            raise TritonModelException(
                f"{where} parameters must map str keys to bool, int or str values; {key!r} is "
                f"{type(value).__name__}"
            )
    return json.dumps(params)


class _Inputs(dict[str, np.ndarray]):
    """A request's inputs: ``request.inputs()`` (Triton: a list of Tensors) and ``request.inputs[name]``."""

    def __call__(self) -> list[Tensor]:
        return [Tensor(name, array) for name, array in self.items()]


class InferenceResponse:
    """Outputs for one request, or the error that failed it; optional parameters (bool, int, str values)."""

    __slots__ = ("_error", "_outputs", "_parameters")

    def __init__(self, output_tensors: Iterable[Tensor] = (), error: TritonError | None = None,
                 parameters: Mapping[str, Any] | None = None) -> None:
        tensors = list(output_tensors)
        if not all(isinstance(t, Tensor) for t in tensors):
            kinds = sorted({type(t).__name__ for t in tensors if not isinstance(t, Tensor)})
            raise TritonModelException(f"InferenceResponse output_tensors must be pb_utils.Tensor objects, got {kinds}")
        if error is not None and not isinstance(error, TritonError):
            error = TritonError(str(error))
        self._outputs = tensors
        self._error = error
        self._parameters = _parameters_json(parameters, "InferenceResponse")

    def output_tensors(self) -> list[Tensor]:
        return self._outputs

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error

    def parameters(self) -> str:
        """The parameters as a JSON string (``json.loads`` it)."""
        return self._parameters

    def as_dict(self) -> dict[str, np.ndarray]:
        """servelab convenience: the outputs by name."""
        return {t.name(): t.as_numpy() for t in self._outputs}

    def _result(self) -> dict[str, np.ndarray] | ServelabError:
        """What a default model's response carries back: the outputs by name, or the error (no StreamItem)."""
        return to_servelab(self._error) if self._error is not None else self.as_dict()

    def _item(self, final: bool) -> StreamItem:
        """This response as the server carries it."""
        params = {} if self._parameters == _NO_PARAMETERS else json.loads(self._parameters)
        if self._error is not None:
            return StreamItem(error=to_servelab(self._error), final=final, parameters=params)
        return StreamItem(self.as_dict(), final=final, parameters=params)

    @classmethod
    def _from_item(cls, item: StreamItem, wanted: list[str]) -> InferenceResponse:
        if item.error is not None:
            return cls(error=from_servelab(item.error))
        outputs = item.outputs or {}
        names = [n for n in wanted if n in outputs] if wanted else list(outputs)
        return cls([Tensor(n, outputs[n]) for n in names], parameters=item.parameters)


class InferenceResponseSender:
    """Sends a request's responses (``request.get_response_sender()``); the last one carries
    ``flags=TRITONSERVER_RESPONSE_COMPLETE_FINAL`` (it may be the flag alone: ``send(flags=...)``)."""

    __slots__ = ("_cancelled", "_closed", "_emit", "_index", "_lock")

    def __init__(self, emit: Emit, index: int, cancelled: Callable[[], bool]) -> None:
        self._emit = emit
        self._index = index
        self._cancelled = cancelled
        self._closed = False
        self._lock = threading.Lock()

    def send(self, response: InferenceResponse | None = None, flags: int = 0) -> None:
        final = bool(flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        if response is None and not final:
            raise TritonModelException("send() without a response must set flags=TRITONSERVER_RESPONSE_COMPLETE_FINAL")
        if response is not None and not isinstance(response, InferenceResponse):
            raise TritonModelException(f"send() takes a pb_utils.InferenceResponse, got {type(response).__name__}")
        with self._lock:
            if self._closed:
                raise TritonModelException("Unable to send response. Response sender has been closed.")
            self._closed = final
            item = response._item(final) if response is not None else StreamItem(final=True)
            self._emit(self._index, item)

    def is_cancelled(self) -> bool:
        return self._cancelled()

    def _close_with(self, item: StreamItem) -> bool:
        """Send ``item`` as the final response unless the model sent its final one already (the backend's
        answer when ``execute`` fails); whether it was sent."""
        with self._lock:
            if self._closed:
                return False
            self._closed = True
            item.final = True
            self._emit(self._index, item)
            return True

    @property
    def closed(self) -> bool:
        """Whether the final response has been sent."""
        return self._closed


class ResponseIterator:
    """A decoupled BLS call's responses, as they come (the last one may be empty)."""

    def __init__(self, items: Iterator[StreamItem], wanted: list[str]) -> None:
        self._items = items
        self._wanted = wanted
        self._done = False

    def __iter__(self) -> ResponseIterator:
        return self

    def __next__(self) -> InferenceResponse:
        if self._done:
            raise StopIteration
        try:
            item = next(self._items)
        except StopIteration:
            self._done = True
            raise
        if item.final:
            self._done = True
        return InferenceResponse._from_item(item, self._wanted)

    def cancel(self) -> None:
        """Stop reading: the remaining responses are dropped."""
        self._done = True
        close = getattr(self._items, "close", None)
        if close is not None:
            close()


class InferenceRequest:
    """A request to a model: the server's to ``execute``, or one a model sends (BLS, :meth:`exec`)."""

    def __init__(
        self,
        request_id: str = "",
        correlation_id: int | str = 0,
        inputs: Iterable[Tensor] | Mapping[str, Any] = (),
        requested_output_names: Iterable[str] = (),
        model_name: str | bytes = "",
        model_version: int = -1,
        flags: int = 0,
        timeout: int = 0,
        preferred_memory: Any = None,
        trace: Any = None,
        parameters: Mapping[str, Any] | None = None,
    ) -> None:
        if not isinstance(correlation_id, int | str):
            raise TritonModelException("Correlation ID must be integer or string")
        self.model_name = model_name.decode() if isinstance(model_name, bytes) else str(model_name)
        self.inputs = _Inputs(_input_arrays(inputs))
        self._request_id = str(request_id)
        self._correlation_id = correlation_id
        self._requested = [n.decode() if isinstance(n, bytes) else str(n) for n in requested_output_names]
        self._version = int(model_version)
        self._flags = int(flags)
        self._timeout = int(timeout)
        self._parameters = _parameters_json(parameters, "InferenceRequest")
        self._sender: InferenceResponseSender | None = None
        self._cancelled: Callable[[], bool] = lambda: False

    @classmethod
    def _for_execute(cls, inputs: Mapping[str, np.ndarray], parameters: Mapping[str, Any], outputs: list[str],
                     model_name: str, sender: InferenceResponseSender, cancelled: Callable[[], bool],
                     request_id: str = "") -> InferenceRequest:
        """The request the backend hands to ``execute`` (any parameter value is allowed from the wire)."""
        request = cls.__new__(cls)  # what __init__ sets, without checking what the server built itself
        request.model_name = model_name
        request.inputs = _Inputs(inputs)
        request._requested = outputs  # a list of its own (the caller builds one per request)
        request._version, request._flags, request._timeout = -1, 0, 0
        request._parameters = json.dumps(dict(parameters), default=str) if parameters else _NO_PARAMETERS
        request._request_id = request_id
        correlation = parameters.get("sequence_id", 0) if parameters else 0
        request._correlation_id = correlation if isinstance(correlation, int | str) else 0
        request._sender, request._cancelled = sender, cancelled
        return request

    # ----- what execute reads -----
    def request_id(self) -> str:
        return self._request_id

    def correlation_id(self) -> int | str:
        return self._correlation_id

    def flags(self) -> int:
        return self._flags

    def set_flags(self, flags: int) -> None:
        self._flags = int(flags)

    def timeout(self) -> int:
        return self._timeout

    def parameters(self) -> str:
        """The request's parameters as a JSON string (``json.loads`` it)."""
        return self._parameters

    def requested_output_names(self) -> list[str]:
        return list(self._requested)

    def get(self, name: str) -> np.ndarray:
        """servelab convenience: the input ``name`` as an array; KeyError names the inputs there are."""
        try:
            return self.inputs[name]
        except KeyError:
            raise KeyError(f"no input {name!r}; the request has {sorted(self.inputs)}") from None

    def get_response_sender(self) -> InferenceResponseSender:
        if self._sender is None:
            raise TritonModelException("only a request the server passed to execute() has a response sender")
        return self._sender

    def is_cancelled(self) -> bool:
        return self._cancelled()

    def set_release_flags(self, flags: int) -> None:
        if flags & TRITONSERVER_REQUEST_RELEASE_RESCHEDULE:
            raise TritonModelException(
                "request rescheduling (TRITONSERVER_REQUEST_RELEASE_RESCHEDULE) needs an iterative sequence "
                "batcher, which servelab does not have"
            )

    def trace(self) -> None:
        return None

    # ----- BLS -----
    def exec(self, decoupled: bool = False) -> Any:
        """Run this request on ``model_name`` in the server: an InferenceResponse (an error one if it
        failed), or with ``decoupled=True`` an iterator of the model's responses."""
        services = _runtime.current()
        version = "" if self._version < 0 else str(self._version)
        inputs = dict(self.inputs)
        if decoupled:
            if services.stream is None:
                raise TritonModelException("BLS calls need a server: this model is not running in one")
            items = services.stream(self.model_name, version, inputs, json.loads(self._parameters))
            return ResponseIterator(_guarded(items), self._requested)
        if services.infer is None:
            raise TritonModelException("BLS calls need a server: this model is not running in one")
        try:
            outputs = services.infer(self.model_name, version, inputs)
        except ServelabError as exc:
            return InferenceResponse(error=from_servelab(exc))
        return InferenceResponse._from_item(StreamItem(outputs, final=True), self._requested)

    def async_exec(self, decoupled: bool = False) -> asyncio.Future[Any]:
        """:meth:`exec` as an awaitable (in ``async def execute``); a decoupled call's responses are all
        read before it resolves."""
        loop = asyncio.get_running_loop()
        if decoupled:
            return loop.run_in_executor(None, lambda: _Collected(list(self.exec(decoupled=True))))
        return loop.run_in_executor(None, self.exec)


class _Collected(ResponseIterator):
    """A decoupled call's responses already read (what async_exec resolves to)."""

    def __init__(self, responses: list[InferenceResponse]) -> None:
        self._responses = iter(responses)

    def __next__(self) -> InferenceResponse:
        return next(self._responses)

    def cancel(self) -> None:
        self._responses = iter(())


def _guarded(items: Iterator[StreamItem]) -> Iterator[StreamItem]:
    """A failed stream call becomes one final error response, as an error reply would be."""
    try:
        yield from items
    except ServelabError as exc:
        yield StreamItem(error=exc, final=True)


def _input_arrays(inputs: Iterable[Tensor] | Mapping[str, Any]) -> dict[str, np.ndarray]:
    if isinstance(inputs, Mapping):
        return {str(k): Tensor(str(k), v).as_numpy() for k, v in inputs.items()}
    arrays: dict[str, np.ndarray] = {}
    for tensor in inputs:
        if not isinstance(tensor, Tensor):
            raise TritonModelException(f"InferenceRequest inputs must be pb_utils.Tensor objects, got {type(tensor).__name__}")
        arrays[tensor.name()] = tensor.as_numpy()
    return arrays
