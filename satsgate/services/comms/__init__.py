"""Communication services: e-mail, SMS, calls, AI calls, fax and the voice bridge, their
deliveries, and the screen every communication passes before a provider."""
