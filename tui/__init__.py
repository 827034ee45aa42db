"""torchdeck's user interface: the Textual console and the headless CLI.
Talks to backends only through their interface; never imports boto3,
kubernetes or torch."""
