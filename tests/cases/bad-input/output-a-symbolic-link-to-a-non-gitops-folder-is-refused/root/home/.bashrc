export PS1=x
