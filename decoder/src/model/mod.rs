//! Models (being written).
