#!/usr/bin/env bash
# Regenerate the vendored apache.rocketmq.v2 .proto files and our Python stubs.
#
#   1. extract_proto.py prints definition.proto / service.proto from the descriptors inside the
#      installed rocketmq-python-client (it ships no .proto sources);
#   2. grpc_tools.protoc turns them (and our own store_service.proto) into *_pb2.py / *_pb2_grpc.py here;
#   3. the absolute "import definition_pb2" lines become package-relative;
#   4. check_same_schema: our serialized descriptors must equal the client's, byte for byte,
#      so both can live in one process (protobuf's default pool accepts an identical file twice).
#
# Run from the repo root:  bash rmq_spark/broker/proto/regen.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
py="${PYTHON:-.venv/bin/python}"
"$py" "$here/extract_proto.py"
"$py" -m grpc_tools.protoc -I "$here" --python_out="$here" --grpc_python_out="$here" \
    "$here/definition.proto" "$here/service.proto" "$here/store_service.proto"
sed -i -e 's/^import definition_pb2 as /from . import definition_pb2 as /' \
       -e 's/^import service_pb2 as /from . import service_pb2 as /' \
       -e 's/^import store_service_pb2 as /from . import store_service_pb2 as /' "$here"/*_pb2*.py
rm -f "$here/definition_pb2_grpc.py"
"$py" - <<'PY'
from google.protobuf import descriptor_pb2
from rmq_spark.broker.proto import definition_pb2 as ours_def, service_pb2 as ours_svc
from rocketmq.grpc_protocol import definition_pb2 as theirs_def, service_pb2 as theirs_svc
for ours, theirs in ((ours_def, theirs_def), (ours_svc, theirs_svc)):
    a, b = descriptor_pb2.FileDescriptorProto(), descriptor_pb2.FileDescriptorProto()
    ours.DESCRIPTOR.CopyToProto(a)
    theirs.DESCRIPTOR.CopyToProto(b)
    if a.SerializeToString(deterministic=True) != b.SerializeToString(deterministic=True):
        raise SystemExit(f"schema differs from the client's: {a.name}")
    print(f"same schema as the client: {a.name}")
PY
