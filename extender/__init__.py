"""kvspread extender (see docs/)."""
