//! Delta-t reliable transport (sans-IO). Work in progress.
