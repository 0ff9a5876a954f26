module github.com/memsnap/memsnap

go 1.26

require github.com/nlpodyssey/gopickle v0.2.0 // indirect
