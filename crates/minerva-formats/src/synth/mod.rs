//! Synthetic models.
