from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class LedgerComponent(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MANAGED_LEDGER: _ClassVar[LedgerComponent]
    MANAGED_CURSOR: _ClassVar[LedgerComponent]
    SCHEMA_STORAGE: _ClassVar[LedgerComponent]

class LedgerType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LEDGER: _ClassVar[LedgerType]
    OFFLOAD_LEDGER: _ClassVar[LedgerType]
MANAGED_LEDGER: LedgerComponent
MANAGED_CURSOR: LedgerComponent
SCHEMA_STORAGE: LedgerComponent
LEDGER: LedgerType
OFFLOAD_LEDGER: LedgerType

class KeyValue(_message.Message):
    __slots__ = ("key", "value")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: str
    def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...

class OffloadDriverMetadata(_message.Message):
    __slots__ = ("name", "properties")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    name: str
    properties: _containers.RepeatedCompositeFieldContainer[KeyValue]
    def __init__(self, name: _Optional[str] = ..., properties: _Optional[_Iterable[_Union[KeyValue, _Mapping]]] = ...) -> None: ...

class OffloadContext(_message.Message):
    __slots__ = ("uidMsb", "uidLsb", "complete", "bookkeeperDeleted", "timestamp", "driverMetadata")
    UIDMSB_FIELD_NUMBER: _ClassVar[int]
    UIDLSB_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_FIELD_NUMBER: _ClassVar[int]
    BOOKKEEPERDELETED_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    DRIVERMETADATA_FIELD_NUMBER: _ClassVar[int]
    uidMsb: int
    uidLsb: int
    complete: bool
    bookkeeperDeleted: bool
    timestamp: int
    driverMetadata: OffloadDriverMetadata
    def __init__(self, uidMsb: _Optional[int] = ..., uidLsb: _Optional[int] = ..., complete: _Optional[bool] = ..., bookkeeperDeleted: _Optional[bool] = ..., timestamp: _Optional[int] = ..., driverMetadata: _Optional[_Union[OffloadDriverMetadata, _Mapping]] = ...) -> None: ...

class PendingDeleteLedgerInfo(_message.Message):
    __slots__ = ("topicName", "ledgerComponent", "cursorName", "schemaId", "ledgerType", "ledgerId", "offloadContext")
    TOPICNAME_FIELD_NUMBER: _ClassVar[int]
    LEDGERCOMPONENT_FIELD_NUMBER: _ClassVar[int]
    CURSORNAME_FIELD_NUMBER: _ClassVar[int]
    SCHEMAID_FIELD_NUMBER: _ClassVar[int]
    LEDGERTYPE_FIELD_NUMBER: _ClassVar[int]
    LEDGERID_FIELD_NUMBER: _ClassVar[int]
    OFFLOADCONTEXT_FIELD_NUMBER: _ClassVar[int]
    topicName: str
    ledgerComponent: LedgerComponent
    cursorName: str
    schemaId: str
    ledgerType: LedgerType
    ledgerId: int
    offloadContext: OffloadContext
    def __init__(self, topicName: _Optional[str] = ..., ledgerComponent: _Optional[_Union[LedgerComponent, str]] = ..., cursorName: _Optional[str] = ..., schemaId: _Optional[str] = ..., ledgerType: _Optional[_Union[LedgerType, str]] = ..., ledgerId: _Optional[int] = ..., offloadContext: _Optional[_Union[OffloadContext, _Mapping]] = ...) -> None: ...
