//! tower layers.
