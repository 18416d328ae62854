"""cocotb + Verilator tests of generated RTL (see verilator.py for the toolchain setup)."""
