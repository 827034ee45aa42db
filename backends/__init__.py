"""All of torchdeck's I/O: the local (torchrun), kubernetes and eks backends.
Never imports textual; returns plain dataclasses and raises the project's own
errors."""
