"""Names and metadata for an ONNX file that ``mindspore.export`` wrote, and the metadata
of an exported file read back (ONNX or MINDIR).

MindSpore names an ONNX graph's outputs after its internal nodes (``564``,
``567-Default/detector-YOLOX/.../Cast-op2``) and writes no metadata. :func:`label_onnx_model`
renames the outputs (``detections``, ``num_detections``, ``predictions``) and stores a JSON
description under one ``metadata_props`` key, which onnxruntime reads back with
``session.get_modelmeta().custom_metadata_map``.

The file is edited through a protobuf schema holding only the fields touched here (ONNX's
field numbers, ``onnx/onnx.proto``): every other field is kept as protobuf's unknown
fields and written back unchanged, so neither the ``onnx`` package nor MindSpore is needed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

# ONNX's field numbers for the parts edited here (onnx/onnx.proto, stable since IR v3).
_MESSAGES = {
    "StringStringEntryProto": [("key", 1, "string", False), ("value", 2, "string", False)],
    "ValueInfoProto": [("name", 1, "string", False)],
    "NodeProto": [("input", 1, "string", True), ("output", 2, "string", True)],
    "GraphProto": [
        ("node", 1, "NodeProto", True),
        ("output", 12, "ValueInfoProto", True),
        ("value_info", 13, "ValueInfoProto", True),
    ],
    "ModelProto": [
        ("graph", 7, "GraphProto", False),
        ("metadata_props", 14, "StringStringEntryProto", True),
    ],
    # Field 14 of both formats' ModelProto: ONNX's metadata_props and MINDIR's user_info
    # (map<string, string>, the same entries on the wire), read without parsing the graph.
    "MetadataOnly": [("metadata_props", 14, "StringStringEntryProto", True)],
}
_PACKAGE = "msdet_onnx_subset"


class OnnxEditError(ValueError):
    """An ONNX file that cannot be labelled as asked (names it and why)."""


@cache
def _subset_pool() -> descriptor_pool.DescriptorPool:
    """The subset schema's messages in a pool of their own (built once)."""
    file = descriptor_pb2.FileDescriptorProto(
        name="msdet_onnx_subset.proto", package=_PACKAGE, syntax="proto2"
    )
    for name, fields in _MESSAGES.items():
        message = file.message_type.add(name=name)
        for field_name, number, kind, repeated in fields:
            field = message.field.add(name=field_name, number=number)
            field.label = field.LABEL_REPEATED if repeated else field.LABEL_OPTIONAL
            if kind == "string":
                field.type = field.TYPE_STRING
            else:
                field.type = field.TYPE_MESSAGE
                field.type_name = f".{_PACKAGE}.{kind}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return pool


def _message_class(name: str) -> type:
    """A message class of the subset schema."""
    return message_factory.GetMessageClass(
        _subset_pool().FindMessageTypeByName(f"{_PACKAGE}.{name}")
    )


def read_model_metadata(path: str) -> dict[str, str]:
    """The key -> text metadata of an ONNX file (``metadata_props``) or a MINDIR file
    (``user_info``, which ``mindspore.export(custom_func=...)`` sets)."""
    message = _parse(path, "MetadataOnly", "an ONNX or MINDIR model")
    return {p.key: p.value for p in message.metadata_props}


def onnx_output_names(path: str) -> list[str]:
    """The graph output names of the ONNX file ``path``, in order."""
    model = _read(path)
    return [value.name for value in model.graph.output]


def label_onnx_model(
    path: str, output_names: Sequence[str], metadata: Mapping[str, str] | None = None
) -> None:
    """Rename the graph outputs of ``path`` to ``output_names`` (in order) wherever the
    graph uses them, and set ``metadata`` (key -> text) in its ``metadata_props``; the file
    is rewritten in place (through a temporary file, so a failure leaves it as it was)."""
    model = _read(path)
    graph = model.graph
    old = [value.name for value in graph.output]
    if len(old) != len(output_names):
        raise OnnxEditError(
            f"{path} has {len(old)} outputs ({', '.join(old)}), {len(output_names)} names given"
        )
    rename = dict(zip(old, output_names))
    used = {name for node in graph.node for name in (*node.input, *node.output)}
    clash = (set(output_names) & used) - set(old)
    if clash:
        raise OnnxEditError(f"{path} already uses the names {sorted(clash)}")
    for node in graph.node:
        for names in (node.input, node.output):
            for k, name in enumerate(names):
                names[k] = rename.get(name, name)
    for value in (*graph.output, *graph.value_info):
        value.name = rename.get(value.name, value.name)
    if metadata:
        kept = [(p.key, p.value) for p in model.metadata_props if p.key not in metadata]
        del model.metadata_props[:]
        for key, value in [*kept, *metadata.items()]:
            model.metadata_props.add(key=str(key), value=str(value))
    tmp = f"{path}.tmp"
    with open(tmp, "wb") as f:
        f.write(model.SerializeToString())
    os.replace(tmp, path)


def _parse(path: str, message_name: str, what: str) -> Any:
    """The file ``path`` parsed as the subset schema's ``message_name``; an error saying it
    is not ``what`` when protobuf cannot read it."""
    message = _message_class(message_name)()
    with open(path, "rb") as f:
        data = f.read()
    try:
        message.ParseFromString(data)
    except Exception as err:  # protobuf's DecodeError
        raise OnnxEditError(f"{path} is not {what} ({err})") from err
    return message


def _read(path: str) -> Any:
    model = _parse(path, "ModelProto", "an ONNX model")
    if not model.HasField("graph"):
        raise OnnxEditError(f"{path} is not an ONNX model (no graph)")
    return model
