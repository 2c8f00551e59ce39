"""The option table (each option's name, parser, default and modes), its value parsers, and the
readers' and writers' parsed options; validated on the driver before any task runs.

May import: core.
"""
