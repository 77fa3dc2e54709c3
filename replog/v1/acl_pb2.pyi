from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Acl(_message.Message):
    __slots__ = ("principal", "resource_type", "resource_name", "prefix", "operation")
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_TYPE_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_NAME_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    principal: str
    resource_type: str
    resource_name: str
    prefix: bool
    operation: str
    def __init__(self, principal: _Optional[str] = ..., resource_type: _Optional[str] = ..., resource_name: _Optional[str] = ..., prefix: _Optional[bool] = ..., operation: _Optional[str] = ...) -> None: ...

class AclChangeResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListAclsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListAclsResponse(_message.Message):
    __slots__ = ("acls",)
    ACLS_FIELD_NUMBER: _ClassVar[int]
    acls: _containers.RepeatedCompositeFieldContainer[Acl]
    def __init__(self, acls: _Optional[_Iterable[_Union[Acl, _Mapping]]] = ...) -> None: ...

class Quota(_message.Message):
    __slots__ = ("principal", "produce_bytes_per_s", "fetch_bytes_per_s", "requests_per_s", "metadata_writes_per_s")
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    PRODUCE_BYTES_PER_S_FIELD_NUMBER: _ClassVar[int]
    FETCH_BYTES_PER_S_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_PER_S_FIELD_NUMBER: _ClassVar[int]
    METADATA_WRITES_PER_S_FIELD_NUMBER: _ClassVar[int]
    principal: str
    produce_bytes_per_s: int
    fetch_bytes_per_s: int
    requests_per_s: int
    metadata_writes_per_s: int
    def __init__(self, principal: _Optional[str] = ..., produce_bytes_per_s: _Optional[int] = ..., fetch_bytes_per_s: _Optional[int] = ..., requests_per_s: _Optional[int] = ..., metadata_writes_per_s: _Optional[int] = ...) -> None: ...

class QuotaChangeResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListQuotasRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListQuotasResponse(_message.Message):
    __slots__ = ("quotas",)
    QUOTAS_FIELD_NUMBER: _ClassVar[int]
    quotas: _containers.RepeatedCompositeFieldContainer[Quota]
    def __init__(self, quotas: _Optional[_Iterable[_Union[Quota, _Mapping]]] = ...) -> None: ...

class WhoAmIRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class WhoAmIResponse(_message.Message):
    __slots__ = ("principal", "authenticated_by", "authorization", "super_user")
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    AUTHENTICATED_BY_FIELD_NUMBER: _ClassVar[int]
    AUTHORIZATION_FIELD_NUMBER: _ClassVar[int]
    SUPER_USER_FIELD_NUMBER: _ClassVar[int]
    principal: str
    authenticated_by: str
    authorization: str
    super_user: bool
    def __init__(self, principal: _Optional[str] = ..., authenticated_by: _Optional[str] = ..., authorization: _Optional[str] = ..., super_user: _Optional[bool] = ...) -> None: ...
