//! `starling-mpi`: Starling's transport over MPI.
//!
//! **Not built yet** (tracked by the MPI adapter issue). This crate will implement the
//! runtime's `Transport` over real MPI with the `mpi` crate (rsmpi): one progression
//! thread that owns every MPI call, envelopes and payloads on a duplicate of the
//! application's communicator, physical tags bounded by `MPI_TAG_UB` through
//! [`starling_core::tags::TagSpace`], and programs that run unchanged under
//! `mpirun -n N`.
//!
//! Today it holds no code, so that the workspace layout is final and the facade's `mpi`
//! feature already has its crate.
