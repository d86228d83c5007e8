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

MANAGED_LEDGER: LedgerComponent
MANAGED_CURSOR: LedgerComponent
SCHEMA_STORAGE: LedgerComponent

class NestedPositionInfo(_message.Message):
    __slots__ = ("ledgerId", "entryId")
    LEDGERID_FIELD_NUMBER: _ClassVar[int]
    ENTRYID_FIELD_NUMBER: _ClassVar[int]
    ledgerId: int
    entryId: int
    def __init__(self, ledgerId: _Optional[int] = ..., entryId: _Optional[int] = ...) -> None: ...

class MessageRange(_message.Message):
    __slots__ = ("lowerEndpoint", "upperEndpoint")
    LOWERENDPOINT_FIELD_NUMBER: _ClassVar[int]
    UPPERENDPOINT_FIELD_NUMBER: _ClassVar[int]
    lowerEndpoint: NestedPositionInfo
    upperEndpoint: NestedPositionInfo
    def __init__(
        self,
        lowerEndpoint: _Optional[_Union[NestedPositionInfo, _Mapping]] = ...,
        upperEndpoint: _Optional[_Union[NestedPositionInfo, _Mapping]] = ...,
    ) -> None: ...

class LongProperty(_message.Message):
    __slots__ = ("name", "value")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    name: str
    value: int
    def __init__(self, name: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...

class BatchedEntryDeletionIndexInfo(_message.Message):
    __slots__ = ("position", "deleteSet")
    POSITION_FIELD_NUMBER: _ClassVar[int]
    DELETESET_FIELD_NUMBER: _ClassVar[int]
    position: NestedPositionInfo
    deleteSet: _containers.RepeatedScalarFieldContainer[int]
    def __init__(
        self,
        position: _Optional[_Union[NestedPositionInfo, _Mapping]] = ...,
        deleteSet: _Optional[_Iterable[int]] = ...,
    ) -> None: ...

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
    def __init__(
        self,
        name: _Optional[str] = ...,
        properties: _Optional[_Iterable[_Union[KeyValue, _Mapping]]] = ...,
    ) -> None: ...

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
    def __init__(
        self,
        uidMsb: _Optional[int] = ...,
        uidLsb: _Optional[int] = ...,
        complete: _Optional[bool] = ...,
        bookkeeperDeleted: _Optional[bool] = ...,
        timestamp: _Optional[int] = ...,
        driverMetadata: _Optional[_Union[OffloadDriverMetadata, _Mapping]] = ...,
    ) -> None: ...

class ManagedLedgerInfo(_message.Message):
    __slots__ = ("ledgerInfo", "properties", "lastListedLedgerId")
    class LedgerInfo(_message.Message):
        __slots__ = ("ledgerId", "entries", "size", "timestamp", "offloadContext")
        LEDGERID_FIELD_NUMBER: _ClassVar[int]
        ENTRIES_FIELD_NUMBER: _ClassVar[int]
        SIZE_FIELD_NUMBER: _ClassVar[int]
        TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
        OFFLOADCONTEXT_FIELD_NUMBER: _ClassVar[int]
        ledgerId: int
        entries: int
        size: int
        timestamp: int
        offloadContext: OffloadContext
        def __init__(
            self,
            ledgerId: _Optional[int] = ...,
            entries: _Optional[int] = ...,
            size: _Optional[int] = ...,
            timestamp: _Optional[int] = ...,
            offloadContext: _Optional[_Union[OffloadContext, _Mapping]] = ...,
        ) -> None: ...

    LEDGERINFO_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    LASTLISTEDLEDGERID_FIELD_NUMBER: _ClassVar[int]
    ledgerInfo: _containers.RepeatedCompositeFieldContainer[ManagedLedgerInfo.LedgerInfo]
    properties: _containers.RepeatedCompositeFieldContainer[KeyValue]
    lastListedLedgerId: int
    def __init__(
        self,
        ledgerInfo: _Optional[_Iterable[_Union[ManagedLedgerInfo.LedgerInfo, _Mapping]]] = ...,
        properties: _Optional[_Iterable[_Union[KeyValue, _Mapping]]] = ...,
        lastListedLedgerId: _Optional[int] = ...,
    ) -> None: ...

class ManagedCursorInfo(_message.Message):
    __slots__ = (
        "cursorsLedgerId",
        "markDeleteLedgerId",
        "markDeleteEntryId",
        "individualDeletedMessages",
        "properties",
        "lastActive",
        "batchedEntryDeletionIndexInfo",
    )
    CURSORSLEDGERID_FIELD_NUMBER: _ClassVar[int]
    MARKDELETELEDGERID_FIELD_NUMBER: _ClassVar[int]
    MARKDELETEENTRYID_FIELD_NUMBER: _ClassVar[int]
    INDIVIDUALDELETEDMESSAGES_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    LASTACTIVE_FIELD_NUMBER: _ClassVar[int]
    BATCHEDENTRYDELETIONINDEXINFO_FIELD_NUMBER: _ClassVar[int]
    cursorsLedgerId: int
    markDeleteLedgerId: int
    markDeleteEntryId: int
    individualDeletedMessages: _containers.RepeatedCompositeFieldContainer[MessageRange]
    properties: _containers.RepeatedCompositeFieldContainer[LongProperty]
    lastActive: int
    batchedEntryDeletionIndexInfo: _containers.RepeatedCompositeFieldContainer[
        BatchedEntryDeletionIndexInfo
    ]
    def __init__(
        self,
        cursorsLedgerId: _Optional[int] = ...,
        markDeleteLedgerId: _Optional[int] = ...,
        markDeleteEntryId: _Optional[int] = ...,
        individualDeletedMessages: _Optional[_Iterable[_Union[MessageRange, _Mapping]]] = ...,
        properties: _Optional[_Iterable[_Union[LongProperty, _Mapping]]] = ...,
        lastActive: _Optional[int] = ...,
        batchedEntryDeletionIndexInfo: _Optional[
            _Iterable[_Union[BatchedEntryDeletionIndexInfo, _Mapping]]
        ] = ...,
    ) -> None: ...

class LedgerMetadata(_message.Message):
    __slots__ = (
        "ledger_id",
        "managed_ledger_name",
        "component",
        "cursor_name",
        "created_ms",
        "created_by",
    )
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    MANAGED_LEDGER_NAME_FIELD_NUMBER: _ClassVar[int]
    COMPONENT_FIELD_NUMBER: _ClassVar[int]
    CURSOR_NAME_FIELD_NUMBER: _ClassVar[int]
    CREATED_MS_FIELD_NUMBER: _ClassVar[int]
    CREATED_BY_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    managed_ledger_name: str
    component: LedgerComponent
    cursor_name: str
    created_ms: int
    created_by: str
    def __init__(
        self,
        ledger_id: _Optional[int] = ...,
        managed_ledger_name: _Optional[str] = ...,
        component: _Optional[_Union[LedgerComponent, str]] = ...,
        cursor_name: _Optional[str] = ...,
        created_ms: _Optional[int] = ...,
        created_by: _Optional[str] = ...,
    ) -> None: ...

class LedgerIdAllocation(_message.Message):
    __slots__ = ("allocated_by", "allocated_ms", "managed_ledger_name")
    ALLOCATED_BY_FIELD_NUMBER: _ClassVar[int]
    ALLOCATED_MS_FIELD_NUMBER: _ClassVar[int]
    MANAGED_LEDGER_NAME_FIELD_NUMBER: _ClassVar[int]
    allocated_by: str
    allocated_ms: int
    managed_ledger_name: str
    def __init__(
        self,
        allocated_by: _Optional[str] = ...,
        allocated_ms: _Optional[int] = ...,
        managed_ledger_name: _Optional[str] = ...,
    ) -> None: ...

class OffloadedLedgerHeader(_message.Message):
    __slots__ = (
        "ledger_id",
        "managed_ledger_name",
        "component",
        "cursor_name",
        "uid",
        "entries",
        "size",
        "offloaded_ms",
        "offloaded_by",
        "cluster_name",
    )
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    MANAGED_LEDGER_NAME_FIELD_NUMBER: _ClassVar[int]
    COMPONENT_FIELD_NUMBER: _ClassVar[int]
    CURSOR_NAME_FIELD_NUMBER: _ClassVar[int]
    UID_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    OFFLOADED_MS_FIELD_NUMBER: _ClassVar[int]
    OFFLOADED_BY_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    managed_ledger_name: str
    component: LedgerComponent
    cursor_name: str
    uid: str
    entries: int
    size: int
    offloaded_ms: int
    offloaded_by: str
    cluster_name: str
    def __init__(
        self,
        ledger_id: _Optional[int] = ...,
        managed_ledger_name: _Optional[str] = ...,
        component: _Optional[_Union[LedgerComponent, str]] = ...,
        cursor_name: _Optional[str] = ...,
        uid: _Optional[str] = ...,
        entries: _Optional[int] = ...,
        size: _Optional[int] = ...,
        offloaded_ms: _Optional[int] = ...,
        offloaded_by: _Optional[str] = ...,
        cluster_name: _Optional[str] = ...,
    ) -> None: ...
