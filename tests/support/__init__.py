"""What the tests share: the repository's paths, recorded inputs, forged and varied results, servers, references."""
