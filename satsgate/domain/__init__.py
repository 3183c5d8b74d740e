"""What the node knows about the world it serves: languages, media, voices, telephony,
addresses and who asked not to be contacted."""
