"""kvspread simulate (see docs/)."""
