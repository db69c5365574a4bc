"""The CANN contract declared once: the runtime seam, the operators, the collectives."""
