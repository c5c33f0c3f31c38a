"""The ground floor: exit codes and errors, byte sizes, paths under a root, the file rules root
keeps (safefs, the input-file boundary), accounts, settings, and the text that reaches a terminal.
Imports nothing of mlsetup's above it."""
