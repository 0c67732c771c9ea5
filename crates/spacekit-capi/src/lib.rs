//! C ABI for spacekit (issue 17): under construction.
