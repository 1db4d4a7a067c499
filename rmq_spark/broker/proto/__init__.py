"""Generated gRPC/protobuf stubs for ``apache.rocketmq.v2`` (RocketMQ 5's gRPC protocol).

Owns the vendored ``definition.proto`` / ``service.proto`` (printed from the schema inside
rocketmq-python-client 5.1.2 by ``extract_proto.py``) and the modules ``regen.sh`` generates
from them. Hand-written code lives one level up; nothing here is edited by hand.
"""

from __future__ import annotations

__all__: list[str] = []
