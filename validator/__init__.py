"""Validator: keeps every stored config valid as the compiler changes."""
