"""The package version, in a module of its own: modules that need it (the Spark Connect
reducer of :mod:`.acking`) import it from here, never from the package root."""

__version__ = "0.1.0"
