"""kvspread adapter (see docs/)."""
