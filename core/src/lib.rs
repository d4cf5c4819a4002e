//! `starling-core`: the protocol core of Starling, a distributed task runtime in the
//! spirit of StarPU-MPI.
//!
//! This crate **performs no I/O, reads no clock, allocates nothing and contains no
//! `unsafe` code**. It is a set of pure state machines: values go in through methods,
//! decisions come out as values, and an adapter (threads, MPI, a simulator, a serial
//! link) performs them. Its specification is `docs/protocol.md`, which this code follows
//! name for name.
//!
//! # Concept map
//!
//! A job is a set of ranks. The application registers data (each with an owner rank and
//! a 64-bit user tag) and submits one sequential task flow; every rank walks the same
//! flow. Two things happen for each task, on every rank:
//!
//! 1. **Planning** — who runs the task, and what moves. [`insert::plan`] (or
//!    [`insert::plan_into`]) is a pure function of the task's accesses, the
//!    [node-selection policies](select) and the [communication cache](cache): it returns a
//!    [`insert::Plan`] — the executor, the transfers before the task, the write-backs
//!    after it, and the cache updates. Every rank computes the same executor and plans
//!    exactly matching sends and receives, with no coordination message.
//! 2. **Messaging** — the planned transfers become point-to-point requests on the
//!    [`engine::Engine`], which speaks the two-message protocol of the reference: an
//!    [envelope] (kind, communicator, user tag, size, message id) then, unless it
//!    travelled inline, the payload on a [physical tag](tags). Requests live in a
//!    generational [slab](request); sends wait in a priority [ready list](lists); incoming
//!    envelopes meet posted receives in the [matcher], FIFO per (communicator,
//!    source, tag); [statistics](stats) count payload bytes per peer.
//!
//! | module | state machine |
//! | --- | --- |
//! | [`types`] | ids and modes: [`Rank`], [`Tag`], [`CommId`], [`DataId`], [`ReqId`], [`MsgId`], [`PhysTag`], [`Priority`], [`Owner`], [`AccessMode`] |
//! | [`error`] | which fixed table is full ([`Table`]); [`Full`] hands the item back |
//! | [`envelope`] | the 24-byte little-endian message header; total [`envelope::decode`] |
//! | [`tags`] | physical tags bounded by the transport's `tag_ub`; the user-tag allocator |
//! | [`fast`] | the fast path for small messages: which sends go as their payload alone on a tag derived from the user tag, and why the order stays MPI's |
//! | [`request`] | the request state machine and its slab |
//! | [`lists`] | ready list, keyed FIFOs, pending synchronous sends, detached requests |
//! | [`matcher`] | early requests and early data, matched FIFO per key |
//! | [`engine`] | point-to-point progression: commands, `handle_*` inputs, `poll_*` outputs |
//! | [`cache`] | which values were sent to whom, which received copies are valid |
//! | [`coherence`] | which memory nodes (main memory, devices) hold a valid replica of a datum: the MSI protocol |
//! | [`digest`] | canonical 64-bit digests of task inserts, for the graph-agreement check |
//! | [`select`] | node-selection policies (most-R-data, registered policies) |
//! | [`insert`] | the task-insert planner |
//! | [`reduce`] | inter-node reductions of the insert flow: members, the tree's steps per rank, when to initialise and when to wrap up |
//! | [`stats`] | payload bytes and messages per peer |
//! | [`framing`] | the protocol's messages as checked frames on a byte stream; the sans-IO [`framing::Decoder`] |
//! | `link` | (feature `embedded-hal`) the engine driven over an `embedded-hal-nb` serial port to one peer |
//!
//! # The driving contract
//!
//! Adapters drive the [`engine::Engine`]: after every command or `handle_*` input, drain
//! [`engine::Engine::poll_transmit`] and [`engine::Engine::poll_event`] until both return
//! `None`, and perform what they return. The engine's documentation carries the contract
//! in full with a doctested loop. The planner has no outputs to drain: apply each
//! [`insert::Plan::cache`] update with [`cache::Cache::apply`], in order, and submit the
//! plan's transfers to the engine.
//!
//! # Capacities and errors
//!
//! Every table has a capacity fixed by a const generic on the structure that owns it
//! (`Engine<REQ, KEYS, PEERS>`, `Cache<N>`, `Plan<T>`, ...). A full table is an error
//! value naming it ([`Table`]) that hands the item back and changes nothing — never a
//! panic, never an allocation. Errors keep blame apart: a peer's bad message
//! ([`envelope::DecodeError`], [`engine::PeerError`]), a local caller's misuse
//! ([`engine::UsageError`], [`insert::InsertError`]), exhaustion ([`Full`]). Nothing a
//! peer sends can make the core panic.
//!
//! # Features
//!
//! * `defmt` — derives `defmt::Format` on the public types, for logging on embedded
//!   targets.
//! * `embedded-hal` — the `link` module: the protocol to one peer over any
//!   `embedded-hal-nb` serial port, polling paced by an `embedded-hal` delay.
//! * `model` — the reference models of the matcher and the lists, for property
//!   tests and the fuzz targets (`fuzz/`), in the `model` module. It links `std` and allocates: a testing aid,
//!   never for a build that ships.
//!
//! The crate builds for `thumbv7em-none-eabihf` and `riscv32imac-unknown-none-elf`
//! (CI proves it). Minimum Rust version: 1.87.
// The shipped core is `no_std` with no allocator; only its own tests and the `model`
// testing aid (reference models for property tests and fuzzing) link `std`.
#![cfg_attr(not(any(test, feature = "model")), no_std)]
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod cache;
pub mod coherence;
pub mod digest;
pub mod engine;
pub mod envelope;
pub mod error;
pub mod fast;
pub mod framing;
pub mod insert;
#[cfg(feature = "embedded-hal")]
#[cfg_attr(docsrs, doc(cfg(feature = "embedded-hal")))]
pub mod link;
pub mod lists;
pub mod matcher;
#[cfg(any(test, feature = "model"))]
pub mod model;
pub mod reduce;
pub mod request;
pub mod select;
pub mod stats;
pub mod tags;
pub mod types;

pub use error::{Full, Table};
pub use types::{AccessMode, CommId, DataId, MsgId, Owner, PhysTag, Priority, Rank, ReqId, Tag};
