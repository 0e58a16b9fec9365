//! Writers.
