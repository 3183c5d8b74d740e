"""The AI services: text, images, video, music, speech and voices, and what they share."""
