"""External GPU providers behind one interface (base.Provider)."""
