"""Compiler passes that turn a traced graph into a plan the runtime can execute."""
