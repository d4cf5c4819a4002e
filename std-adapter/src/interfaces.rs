//! The built-in data interfaces (being written).
