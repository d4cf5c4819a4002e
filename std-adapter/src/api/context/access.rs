//! The access methods that a task ([`TaskBuilder`](crate::TaskBuilder)) and an insert
//! ([`InsertBuilder`](crate::InsertBuilder)) share: `r`, `w`, `rw`, `scratch`, `redux`
//! and `commute`, each one line over the builder's own `access(h, mode)`.
//!
//! They are written once, here, as a macro that expands to the same inherent methods in
//! both builders, rather than as a trait with provided methods: a trait's methods are in
//! scope only where the trait is imported, so every file that builds a task would need
//! one more `use`, and rustdoc would show the methods on the trait's page instead of on
//! each builder's. The builders differ only in their `access` (a task refuses an unusable
//! handle at once, an insert when it is submitted, with an error).

/// Expands, inside an `impl` block of a builder with an
/// `access<I: Interface>(self, &Handle<I>, AccessMode) -> Self` method, to the shorthand
/// access methods, each one `self.access(h, mode)`.
macro_rules! methods {
    () => {
        /// Reads `h` (`STARPU_R`). As [`access`](Self::access) with [`AccessMode::R`].
        #[must_use]
        pub fn r<I: Interface>(self, h: &Handle<I>) -> Self {
            self.access(h, AccessMode::R)
        }

        /// Writes `h` without reading its previous value (`STARPU_W`). As
        /// [`access`](Self::access) with [`AccessMode::W`].
        #[must_use]
        pub fn w<I: Interface>(self, h: &Handle<I>) -> Self {
            self.access(h, AccessMode::W)
        }

        /// Reads and writes `h` (`STARPU_RW`). As [`access`](Self::access) with
        /// [`AccessMode::RW`].
        #[must_use]
        pub fn rw<I: Interface>(self, h: &Handle<I>) -> Self {
            self.access(h, AccessMode::RW)
        }

        /// Uses `h` as scratch space (`STARPU_SCRATCH`): no ordering with other accesses,
        /// never transferred. As [`access`](Self::access) with [`AccessMode::SCRATCH`].
        #[must_use]
        pub fn scratch<I: Interface>(self, h: &Handle<I>) -> Self {
            self.access(h, AccessMode::SCRATCH)
        }

        /// Contributes to a reduction of `h` (`STARPU_REDUX`): ordered like a write on one
        /// rank; across ranks, see [`Context::redux`](crate::Context::redux). As
        /// [`access`](Self::access) with [`AccessMode::REDUX`].
        #[must_use]
        pub fn redux<I: Interface>(self, h: &Handle<I>) -> Self {
            self.access(h, AccessMode::REDUX)
        }

        /// Writes `h` in any order among other commuting writers
        /// (`STARPU_RW | STARPU_COMMUTE`). As [`access`](Self::access) with
        /// `AccessMode::RW | AccessMode::COMMUTE`.
        #[must_use]
        pub fn commute<I: Interface>(self, h: &Handle<I>) -> Self {
            self.access(h, AccessMode::RW | AccessMode::COMMUTE)
        }
    };
}

pub(crate) use methods;
