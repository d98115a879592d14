//! The tower layers in front of a real axum server on 127.0.0.1.

#![cfg(feature = "tower")]

mod adaptive;
