"""Overlays on the main screen: kernel diff, roofline, skills, candidate detail."""
