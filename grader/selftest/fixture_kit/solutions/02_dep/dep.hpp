#pragma once
int quadruple(int a);
