"""Generated gRPC/protobuf stubs for ``apache.rocketmq.v2`` (RocketMQ 5's gRPC protocol).

Owns the vendored ``definition.proto`` / ``service.proto`` (printed from the schema inside
rocketmq-python-client 5.1.2 by ``extract_proto.py``) and the modules ``regen.sh`` generates
from them, and rmq-spark's own ``store_service.proto`` (``rmq_spark.v1.StoreService``: send-back
and redelivery, ``broker/grpc/store_rpc.py``), the one hand-written schema here. Hand-written code
lives one level up; the generated modules are never edited by hand (``regen.sh``).
"""

from __future__ import annotations

__all__: list[str] = []
