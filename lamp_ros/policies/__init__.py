"""Policy packages, beside the core: each brings its eager model and glue, the entry a spec
names (`policy.entry`), and what it adds to the compiler through compiler/rewrites.py. The core
never imports them (setup.cfg [importlinter]); pi05/ is the reference."""
