"""Attacks: Inverting Gradients (+ joint-ε), DLG/iDLG, closed-form recoveries."""
