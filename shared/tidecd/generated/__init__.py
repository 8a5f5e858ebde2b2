"""Applications that other objects define: app-of-apps children and ApplicationSet records."""
