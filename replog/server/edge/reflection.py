"""Server reflection under both names clients use: `grpc.reflection.v1` and `v1alpha`.

grpcio-reflection implements only `grpc.reflection.v1alpha.ServerReflection`. The v1
service (`grpc/reflection/v1/reflection.proto`) has the same messages field for field (same
numbers, types and names; only the package differs), so their bytes on the wire are the same:
the v1 method is served by the same servicer with the v1alpha message classes. Both list
every service named here, themselves included.
"""

from __future__ import annotations

from collections.abc import Iterable

import grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2 as pb
from grpc_reflection.v1alpha._async import ReflectionServicer

V1_SERVICE_NAME = "grpc.reflection.v1.ServerReflection"
V1ALPHA_SERVICE_NAME: str = reflection.SERVICE_NAME


def enable_reflection(service_names: Iterable[str], server: grpc.aio.Server) -> None:
    names = (*service_names, V1_SERVICE_NAME, V1ALPHA_SERVICE_NAME)
    servicer = ReflectionServicer(names)
    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(servicer, server)
    handlers = {
        "ServerReflectionInfo": grpc.stream_stream_rpc_method_handler(
            servicer.ServerReflectionInfo,
            request_deserializer=pb.ServerReflectionRequest.FromString,
            response_serializer=pb.ServerReflectionResponse.SerializeToString,
        )
    }
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(V1_SERVICE_NAME, handlers),)
    )
    server.add_registered_method_handlers(V1_SERVICE_NAME, handlers)  # type: ignore[attr-defined]
