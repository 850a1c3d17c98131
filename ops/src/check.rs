//! check (todo)
