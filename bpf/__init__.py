"""kvspread collector (see docs/)."""
