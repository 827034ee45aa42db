"""The console's screens: home (runs), launch (form), monitor, help."""
