module github.com/memsnap/memsnap

go 1.26
