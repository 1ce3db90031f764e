"""Reports of `qtool check`, one module per format so a run imports only the one it writes:
text (terminal tables or plain lines), JSON (schemas/check.schema.json, also the baseline file),
JUnit XML and SARIF 2.1.0 (CI systems)."""
