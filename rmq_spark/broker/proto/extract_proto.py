"""Dev tool: rebuild the vendored ``.proto`` files from the official client's descriptors.

``rocketmq-python-client`` 5.1.2 ships only generated ``*_pb2.py`` modules, not the ``.proto``
sources. This script prints the ``FileDescriptorProto`` embedded in those modules back as
``.proto`` text, so that our stubs are generated (by ``regen.sh``) from exactly the schema the
client speaks. The printed files are byte-for-byte the same schema: ``regen.sh`` checks that the
serialized descriptors of our generated modules equal the client's.

Run with the project venv:  ``.venv/bin/python rmq_spark/broker/proto/extract_proto.py``
Not imported by the package.
"""

from __future__ import annotations

import sys
from pathlib import Path

from google.protobuf import descriptor_pb2

__all__ = ["render_file"]

_SCALARS = {
    descriptor_pb2.FieldDescriptorProto.TYPE_DOUBLE: "double",
    descriptor_pb2.FieldDescriptorProto.TYPE_FLOAT: "float",
    descriptor_pb2.FieldDescriptorProto.TYPE_INT64: "int64",
    descriptor_pb2.FieldDescriptorProto.TYPE_UINT64: "uint64",
    descriptor_pb2.FieldDescriptorProto.TYPE_INT32: "int32",
    descriptor_pb2.FieldDescriptorProto.TYPE_FIXED64: "fixed64",
    descriptor_pb2.FieldDescriptorProto.TYPE_FIXED32: "fixed32",
    descriptor_pb2.FieldDescriptorProto.TYPE_BOOL: "bool",
    descriptor_pb2.FieldDescriptorProto.TYPE_STRING: "string",
    descriptor_pb2.FieldDescriptorProto.TYPE_BYTES: "bytes",
    descriptor_pb2.FieldDescriptorProto.TYPE_UINT32: "uint32",
    descriptor_pb2.FieldDescriptorProto.TYPE_SFIXED32: "sfixed32",
    descriptor_pb2.FieldDescriptorProto.TYPE_SFIXED64: "sfixed64",
    descriptor_pb2.FieldDescriptorProto.TYPE_SINT32: "sint32",
    descriptor_pb2.FieldDescriptorProto.TYPE_SINT64: "sint64",
}
_REPEATED = descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED
_FILE_OPTIONS = (
    ("java_package", str),
    ("java_outer_classname", str),
    ("java_multiple_files", bool),
    ("java_generate_equals_and_hash", bool),
    ("java_string_check_utf8", bool),
    ("cc_enable_arenas", bool),
    ("csharp_namespace", str),
)

HEADER = """\
// Licensed to the Apache Software Foundation (ASF) under the Apache License, Version 2.0.
// Schema of apache.rocketmq.v2 as shipped (compiled) inside rocketmq-python-client 5.1.2,
// printed back as .proto by rmq_spark/broker/proto/extract_proto.py. Do not edit by hand:
// re-run regen.sh instead.
"""


def _type_name(field: descriptor_pb2.FieldDescriptorProto, package: str) -> str:
    if field.type in _SCALARS:
        return _SCALARS[field.type]
    name = field.type_name
    prefix = f".{package}."
    return name[len(prefix) :] if name.startswith(prefix) else name.lstrip(".")


def _map_entry(msg: descriptor_pb2.DescriptorProto, field: descriptor_pb2.FieldDescriptorProto):
    for nested in msg.nested_type:
        if nested.options.map_entry and field.type_name.endswith("." + nested.name):
            return nested
    return None


def _field_line(msg, field, package: str) -> str:
    entry = _map_entry(msg, field) if field.label == _REPEATED else None
    if entry is not None:
        key, value = entry.field
        kind = f"map<{_type_name(key, package)}, {_type_name(value, package)}>"
    else:
        label = ""
        if field.label == _REPEATED:
            label = "repeated "
        elif field.proto3_optional:
            label = "optional "
        kind = label + _type_name(field, package)
    return f"{kind} {field.name} = {field.number};"


def _render_enum(enum: descriptor_pb2.EnumDescriptorProto, indent: str) -> list[str]:
    lines = [f"{indent}enum {enum.name} {{"]
    lines += [f"{indent}  {value.name} = {value.number};" for value in enum.value]
    return lines + [f"{indent}}}"]


def _render_message(msg: descriptor_pb2.DescriptorProto, package: str, indent: str) -> list[str]:
    lines = [f"{indent}message {msg.name} {{"]
    inner = indent + "  "
    for enum in msg.enum_type:
        lines += _render_enum(enum, inner)
    for nested in msg.nested_type:
        if not nested.options.map_entry:
            lines += _render_message(nested, package, inner)
    done_oneofs: set[int] = set()
    for field in msg.field:
        in_real_oneof = field.HasField("oneof_index") and not field.proto3_optional
        if not in_real_oneof:
            lines.append(inner + _field_line(msg, field, package))
            continue
        index = field.oneof_index
        if index in done_oneofs:
            continue
        done_oneofs.add(index)
        lines.append(f"{inner}oneof {msg.oneof_decl[index].name} {{")
        for member in msg.field:
            if member.HasField("oneof_index") and member.oneof_index == index:
                if not member.proto3_optional:
                    lines.append(f"{inner}  " + _field_line(msg, member, package))
        lines.append(f"{inner}}}")
    return lines + [f"{indent}}}"]


def _render_service(service: descriptor_pb2.ServiceDescriptorProto, package: str) -> list[str]:
    lines = [f"service {service.name} {{"]
    for method in service.method:
        request = method.input_type.removeprefix(f".{package}.")
        response = method.output_type.removeprefix(f".{package}.")
        client_stream = "stream " if method.client_streaming else ""
        server_stream = "stream " if method.server_streaming else ""
        lines.append(
            f"  rpc {method.name}({client_stream}{request}) returns ({server_stream}{response}) {{}}"
        )
    return lines + ["}"]


def render_file(fdp: descriptor_pb2.FileDescriptorProto) -> str:
    """Print one ``FileDescriptorProto`` as ``.proto`` source text."""
    lines = [HEADER, f'syntax = "{fdp.syntax or "proto2"}";', ""]
    lines += [f'import "{dep}";' for dep in fdp.dependency]
    lines += ["", f"package {fdp.package};", ""]
    for name, kind in _FILE_OPTIONS:
        if fdp.options.HasField(name):
            value = getattr(fdp.options, name)
            text = f'"{value}"' if kind is str else str(value).lower()
            lines.append(f"option {name} = {text};")
    lines.append("")
    for enum in fdp.enum_type:
        lines += _render_enum(enum, "") + [""]
    for msg in fdp.message_type:
        lines += _render_message(msg, fdp.package, "") + [""]
    for service in fdp.service:
        lines += _render_service(service, fdp.package) + [""]
    return "\n".join(lines).rstrip() + "\n"


def main() -> int:
    from rocketmq.grpc_protocol import definition_pb2, service_pb2

    out_dir = Path(__file__).resolve().parent
    for module in (definition_pb2, service_pb2):
        fdp = descriptor_pb2.FileDescriptorProto()
        module.DESCRIPTOR.CopyToProto(fdp)
        (out_dir / fdp.name).write_text(render_file(fdp), encoding="utf-8")
        print(f"wrote {out_dir / fdp.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
