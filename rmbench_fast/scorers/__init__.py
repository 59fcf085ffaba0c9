"""Scorers: sequence-classifier reward models (rm) and DPO implicit rewards (dpo)."""
