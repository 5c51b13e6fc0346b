//! The Kalypso pipeline, pure: no IO, no clock, deterministic order.
