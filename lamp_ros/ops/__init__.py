"""Host and stateful operators that the runtime runs without torch."""
