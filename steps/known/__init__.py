"""Knowledge from outside, read from assets/ with its sources: the tables (driver minimums, compute
capabilities, package names) and the extension recipes."""
