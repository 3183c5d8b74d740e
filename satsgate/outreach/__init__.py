"""Communications' safety: the screen's rules, held requests and their appeals, the
do-not-contact list and the retention of what was sent (issue 19)."""
