"""The modelling API (see ``factorflow`` for the public names)."""
