//! Diodon IO drivers. Work in progress.
