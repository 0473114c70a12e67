"""Sample data for the README's walkthrough (`manage.py sampledata`)."""
