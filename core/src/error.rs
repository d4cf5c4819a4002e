//! Errors shared by several modules.
//!
//! Each operation has its own small error enum in its module; what they share lives
//! here: which fixed-capacity table ran out of room. Blame is kept apart, as in rustls:
//! a *peer* sent something wrong ([`envelope::DecodeError`](crate::envelope::DecodeError),
//! [`engine::PeerError`](crate::engine::PeerError)), the *local caller* misused the API,
//! or a table is *exhausted* ([`Full`]).

use core::fmt;

/// A fixed-capacity table of the core.
///
/// Every table has a capacity chosen by a const generic at construction; none grows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum Table {
    /// The request slab ([`request::Slab`](crate::request::Slab)).
    Requests,
    /// The ready-request list ([`lists::ReadyList`](crate::lists::ReadyList)).
    ReadyList,
    /// Posted receives waiting for an envelope (early requests).
    EarlyRequests,
    /// Envelopes waiting for a receive (early data and synchronous envelopes).
    EarlyData,
    /// Synchronous sends waiting for the receiver's ready acknowledgement.
    SyncSends,
    /// Detached requests in flight.
    Detached,
    /// The distinct (communicator, source, tag) keys of the matcher.
    MatchKeys,
    /// The communication cache ([`cache::Cache`](crate::cache::Cache)).
    Cache,
    /// The node-selection policy registry ([`select::Policies`](crate::select::Policies)).
    Policies,
    /// The transfers of one plan ([`insert::Plan`](crate::insert::Plan)).
    PlanTransfers,
    /// The per-peer statistics ([`stats::Stats`](crate::stats::Stats)).
    Stats,
    /// The engine's queue of transmissions not yet polled.
    Transmits,
    /// The engine's queue of events not yet polled.
    Events,
    /// A slot of the request slab for draining a payload too long for the receive it
    /// arrived for (taken outside the [`Budget`](crate::engine::Budget): the receive's
    /// message is here, so it must not wait for room that only its own completion frees).
    Discards,
}

impl Table {
    /// A short human name for the table, used in error messages.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Requests => "request slab",
            Self::ReadyList => "ready list",
            Self::EarlyRequests => "early-request table",
            Self::EarlyData => "early-data table",
            Self::SyncSends => "sync-send table",
            Self::Detached => "detached-request list",
            Self::MatchKeys => "match-key table",
            Self::Cache => "communication cache",
            Self::Policies => "policy registry",
            Self::PlanTransfers => "plan transfer list",
            Self::Stats => "statistics table",
            Self::Transmits => "transmit queue",
            Self::Events => "event queue",
            Self::Discards => "request slab (a slot to discard a payload)",
        }
    }
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A fixed-capacity table is full; the item that did not fit is handed back.
///
/// Nothing was changed: the caller still owns `item` and may retry after draining the
/// table, or size the table larger (its const generic) and rebuild.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Full<T = ()> {
    /// Which table is full.
    pub table: Table,
    /// The item that did not fit, handed back untouched.
    pub item: T,
}

impl<T> Full<T> {
    /// A full-table error for `table`, handing `item` back.
    pub const fn new(table: Table, item: T) -> Self {
        Self { table, item }
    }

    /// Drops the handed-back item, keeping which table was full.
    pub fn forget_item(self) -> Full {
        Full {
            table: self.table,
            item: (),
        }
    }
}

impl<T> fmt::Display for Full<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the {} is full", self.table)
    }
}

impl<T: fmt::Debug> core::error::Error for Full<T> {}
